#pragma once
/// Library version; CMake parses these three macros, so they are the single source.
#define NCCLINSP_VERSION_MAJOR 0
#define NCCLINSP_VERSION_MINOR 1
#define NCCLINSP_VERSION_PATCH 0
#define NCCLINSP_VERSION_STRING "0.1.0"
