# cmake -DCXX=... -DINCLUDE=... -DHEADERS=a;b [-DWERROR=ON] -P check_headers.cmake
# Compiles each public header alone (included twice) with -fsyntax-only; fails on the first error.
set(_tmp "${CMAKE_CURRENT_BINARY_DIR}/header_check_tu.cpp")
set(_flags -std=c++20 -Wall -Wextra -Wpedantic)
if(WERROR)
  list(APPEND _flags -Werror)
endif()
set(_n 0)
foreach(h IN LISTS HEADERS)
  file(WRITE "${_tmp}" "#include \"${h}\"\n#include \"${h}\"\nint main() {}\n")
  execute_process(COMMAND ${CXX} ${_flags} -fsyntax-only -I${INCLUDE} ${_tmp}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${h} does not compile on its own:\n${err}")
  endif()
  math(EXPR _n "${_n} + 1")
endforeach()
message(STATUS "${_n} headers compile on their own")
