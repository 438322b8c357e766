# ncclinsp_target_defaults(target): warnings as errors and the chosen sanitizers, for our own targets only.
function(ncclinsp_target_defaults tgt)
  target_compile_options(${tgt} PRIVATE -Wall -Wextra -Wpedantic -Werror)
  if(NCCLINSP_SANITIZE)
    target_compile_options(${tgt} PRIVATE -fsanitize=${NCCLINSP_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
    target_link_options(${tgt} PRIVATE -fsanitize=${NCCLINSP_SANITIZE})
  endif()
endfunction()
