#pragma once
/// Umbrella header for quick starts. Library code and tests include the precise headers.
#include "ncclinsp/bandwidth.hpp"
#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/env_options.hpp"
#include "ncclinsp/exporter.hpp"
#include "ncclinsp/inspector.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/sinks/callback_sink.hpp"
#include "ncclinsp/sinks/json_sink.hpp"
#include "ncclinsp/sinks/prom_textfile_sink.hpp"
#include "ncclinsp/version.hpp"
