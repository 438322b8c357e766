# ncclinsp_target_defaults(target): warnings (as errors with NCCLINSP_WERROR) and the chosen
# sanitizers, for our own targets only. Nothing here reaches the ncclinsp INTERFACE target, so
# find_package(ncclinsp) and add_subdirectory consumers get no flags from us.
function(ncclinsp_target_defaults tgt)
  target_compile_options(${tgt} PRIVATE -Wall -Wextra -Wpedantic $<$<BOOL:${NCCLINSP_WERROR}>:-Werror>)
  if(NCCLINSP_SANITIZE)
    target_compile_options(${tgt} PRIVATE -fsanitize=${NCCLINSP_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
    target_link_options(${tgt} PRIVATE -fsanitize=${NCCLINSP_SANITIZE})
  endif()
endfunction()
