#pragma once
/// The name of earlier versions of env_options.hpp (the environment schema), kept so that code
/// including it still compiles; include "ncclinsp/env_options.hpp" instead.

#include "ncclinsp/env_options.hpp"
