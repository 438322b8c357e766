#pragma once
/// ncclinsp-sim's job model: the workload (one training step), the faults, and the coupled timing of every
/// rank's collectives (see sim/README.md "Timing model" for the formulas and what the model leaves out).
///
/// Every rank (in whichever process) computes the whole job's timeline from the configuration and the seed
/// alone, so the ranks of one op agree on its timing without talking to each other.

///
/// This header is the model's one include; the parts: job_hash.hpp, job_options.hpp (options, faults),
/// rank_faults.hpp (the rank faults' schedule), workload_types.hpp, workload.hpp, serving.hpp,
/// link_model.hpp (bandwidth physics), timeline.hpp, proxy_steps.hpp.

#include "job_hash.hpp"
#include "job_options.hpp"
#include "link_model.hpp"
#include "proxy_steps.hpp"
#include "rank_faults.hpp"
#include "timeline.hpp"
#include "workload.hpp"
#include "workload_types.hpp"
