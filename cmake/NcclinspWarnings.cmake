# ncclinsp_target_defaults(target): warnings (as errors with NCCLINSP_WERROR) and the chosen
# sanitizers, for our own targets only. Nothing here reaches the ncclinsp INTERFACE target, so
# find_package(ncclinsp) and add_subdirectory consumers get no flags from us.
function(ncclinsp_target_defaults tgt)
  target_compile_options(${tgt} PRIVATE -Wall -Wextra -Wpedantic $<$<BOOL:${NCCLINSP_WERROR}>:-Werror>)
  # GCC 12/13 at -O3 report -Wrestrict inside std::string's operator+ / insert for code as plain as
  # `"c" + std::to_string(i)` (a false positive, GCC PR 105329/105651); which call sites trip it
  # depends on inlining, so fixing them one by one broke the Release build three times.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 14)
    target_compile_options(${tgt} PRIVATE -Wno-restrict)
  endif()
  if(NCCLINSP_SANITIZE)
    target_compile_options(${tgt} PRIVATE -fsanitize=${NCCLINSP_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
    target_link_options(${tgt} PRIVATE -fsanitize=${NCCLINSP_SANITIZE})
  endif()
endfunction()
