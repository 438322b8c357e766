# cmake -DROOT=<source dir> -P check_docs.cmake  (ctest docs_self_contained)
cmake_minimum_required(VERSION 3.20)
# The repository stands on its own for a reader who has only a clone of it:
#  1. README.md is at most 12 KB (12,000 bytes): a page for users, the rest lives under docs/.
#  2. No project file (docs, sources, scripts, build files) refers to a path outside the repository:
#     a `../shared/` or `shared/docs/` tree, real traces in `nccl-traces/`, or an absolute `/work/`
#     path. The patterns are first checked against known-bad and known-good samples, so a pattern
#     that stops matching fails the test instead of passing silently.
#  3. Every relative link of every Markdown file resolves: the target exists inside the repository
#     and, for `file.md#anchor`, the anchor is one of its headings (GitHub's slugs) or `<a id>`s.
# Build trees, node_modules/, .git/ and this script are not scanned.
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<source dir> -P check_docs.cmake")
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)
if(NOT EXISTS ${ROOT}/README.md OR NOT IS_DIRECTORY ${ROOT}/docs)
  message(FATAL_ERROR "${ROOT} has no README.md or docs/: wrong ROOT?")
endif()
set(_errors "")

# ---- 1. README size ----
set(_readme_max 12000)
file(SIZE ${ROOT}/README.md _readme_size)
if(_readme_size GREATER _readme_max)
  string(APPEND _errors "  README.md is ${_readme_size} bytes, over ${_readme_max}: move details to docs/\n")
endif()

# ---- 2. No path outside the repository ----
# A path starts at the beginning of a line or after a character that cannot be part of a path name.
set(_lead "(^|[^A-Za-z0-9_.~/-])")
set(_outside "${_lead}(\\.\\./)+shared/|${_lead}shared/(docs|nccl-traces)/|${_lead}nccl-traces/|${_lead}/work/")
# The samples are assembled from pieces so that this file would not match itself.
set(_w "wo")
set(_s "sha")
set(_bad_samples
  "see ../${_s}red/docs/design.md" "`${_s}red/docs/collective-physics.md`" "(../../${_s}red/nccl-traces/a.trace)"
  "nccl-traces/h200.trace" "path=/${_w}rk/main/build" "\"/${_w}rk/x\"")
set(_good_samples
  "traces.md#what-real-nccl-traces-show" "NCCLINSP_JOB_ID=${_s}red/run-1" "[deploy](../../docs/deploy.md)"
  "tests/traces/nccl-2.28.9.trace" "/${_w}rkspace/x" "$HOME/${_w}rk/x" "ncclinsp/${_w}rk/queue.hpp")
foreach(s IN LISTS _bad_samples)
  if(NOT s MATCHES "${_outside}")
    string(APPEND _errors "  self-check: the outside-path pattern misses the sample '${s}'\n")
  endif()
endforeach()
foreach(s IN LISTS _good_samples)
  if(s MATCHES "${_outside}")
    string(APPEND _errors "  self-check: the outside-path pattern matches the harmless sample '${s}'\n")
  endif()
endforeach()

# The project's files: in a git checkout, what git tracks or would track (.gitignore'd build trees
# and packages left out); elsewhere (an unpacked archive) every file but build trees and packages.
set(_all "")
find_program(_git git)
if(_git AND EXISTS ${ROOT}/.git)
  execute_process(COMMAND ${_git} -C ${ROOT} ls-files --cached --others --exclude-standard
    OUTPUT_VARIABLE _all RESULT_VARIABLE _rc ERROR_QUIET)
  if(_rc EQUAL 0)
    string(REPLACE ";" "\\;" _all "${_all}")
    string(REPLACE "\n" ";" _all "${_all}")
  else()
    set(_all "")
  endif()
endif()
if(NOT _all)
  file(GLOB_RECURSE _all LIST_DIRECTORIES false RELATIVE ${ROOT} ${ROOT}/*)
endif()
set(_files "")
foreach(f IN LISTS _all)
  if(f STREQUAL "" OR f MATCHES "^(build[^/]*|\\.git|out)/|(^|/)(node_modules|__pycache__)/"
     OR f STREQUAL "tests/check_docs.cmake" OR NOT EXISTS "${ROOT}/${f}" OR IS_DIRECTORY "${ROOT}/${f}")
    continue()
  endif()
  list(APPEND _files "${f}")
endforeach()
list(LENGTH _files _nfiles)
if(_nfiles LESS 50)
  message(FATAL_ERROR "only ${_nfiles} files found under ${ROOT}: wrong ROOT?")
endif()
foreach(f IN LISTS _files)
  # file(STRINGS) reads text lines (binary files give their printable runs); lines are cut at ';'
  # by the list split, which does not hide a path.
  file(STRINGS ${ROOT}/${f} _hits REGEX "${_outside}")
  foreach(line IN LISTS _hits)
    string(STRIP "${line}" line)
    string(SUBSTRING "${line}" 0 160 line)
    string(APPEND _errors "  ${f} points outside the repository: ${line}\n")
  endforeach()
endforeach()

# ---- 3. Markdown links resolve ----
# slug(<out> <heading>): GitHub's anchor for a heading: lower case, markup and punctuation removed
# (letters, digits, spaces, '-' and '_' stay), spaces become '-'.
function(_slug out heading)
  string(TOLOWER "${heading}" h)
  string(REGEX REPLACE "\\]\\([^)]*\\)" "" h "${h}")   # a link's target goes, its text stays
  string(REGEX REPLACE "[^a-z0-9 _-]" "" h "${h}")
  string(STRIP "${h}" h)
  string(REPLACE " " "-" h "${h}")
  set(${out} "${h}" PARENT_SCOPE)
endfunction()

# anchors(<out> <file>): every anchor a Markdown file defines (headings outside code, <a id/name>).
function(_anchors out path)
  file(READ ${path} t)
  string(REPLACE ";" "," t "${t}")
  string(REPLACE "[" "(" t "${t}")
  string(REPLACE "]" ")" t "${t}")
  _strip_fences(t "${t}")
  string(REGEX MATCHALL "\n#+ [^\n]+" hs "\n${t}")
  set(r "")
  foreach(h IN LISTS hs)
    string(REGEX REPLACE "^\n#+ +" "" h "${h}")
    string(REGEX REPLACE "\\)\\([^)]*\\)" ")" h "${h}")   # "(text)(target)": the link's text stays
    _slug(s "${h}")
    list(APPEND r "${s}")
  endforeach()
  string(REGEX MATCHALL "<a (id|name)=\"[^\"]+\"" ids "${t}")
  foreach(i IN LISTS ids)
    string(REGEX REPLACE "^<a (id|name)=\"([^\"]+)\"$" "\\2" i "${i}")
    list(APPEND r "${i}")
  endforeach()
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

# strip_fences(<out> <text>): the text without its ``` code blocks (their brackets are code).
function(_strip_fences out text)
  set(r "")
  while(TRUE)
    string(FIND "${text}" "```" a)
    if(a EQUAL -1)
      break()
    endif()
    string(SUBSTRING "${text}" 0 ${a} head)
    string(APPEND r "${head}")
    math(EXPR a "${a} + 3")
    string(SUBSTRING "${text}" ${a} -1 text)
    string(FIND "${text}" "```" b)
    if(b EQUAL -1)
      set(text "")
      break()
    endif()
    math(EXPR b "${b} + 3")
    string(SUBSTRING "${text}" ${b} -1 text)
  endwhile()
  string(APPEND r "${text}")
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

set(_nlinks 0)
set(_nmd 0)
foreach(f IN LISTS _files)
  if(NOT f MATCHES "\\.md$")
    continue()
  endif()
  math(EXPR _nmd "${_nmd} + 1")
  get_filename_component(_dir ${ROOT}/${f} DIRECTORY)
  file(READ ${ROOT}/${f} _text)
  _strip_fences(_text "${_text}")
  # Inline code is not a link either.
  string(REGEX REPLACE "`[^`\n]*`" "" _text "${_text}")
  # (CMake lists do not split inside square brackets: take the targets out of "](...)" first.)
  string(REPLACE "](" "<<LINK>>" _text "${_text}")
  string(REGEX MATCHALL "<<LINK>>[^) \n]+" _links "${_text}")
  foreach(l IN LISTS _links)
    string(SUBSTRING "${l}" 8 -1 target)
    if(target MATCHES "^[a-z]+:")
      continue()   # https:, mailto:
    endif()
    math(EXPR _nlinks "${_nlinks} + 1")
    set(anchor "")
    if(target MATCHES "^([^#]*)#(.*)$")
      set(target "${CMAKE_MATCH_1}")
      set(anchor "${CMAKE_MATCH_2}")
    endif()
    if(target STREQUAL "")
      set(path ${ROOT}/${f})
    else()
      get_filename_component(path "${target}" ABSOLUTE BASE_DIR ${_dir})
    endif()
    string(FIND "${path}/" "${ROOT}/" _in)
    if(NOT _in EQUAL 0)
      string(APPEND _errors "  ${f}: link (${target}) leaves the repository\n")
      continue()
    endif()
    if(NOT EXISTS "${path}")
      string(APPEND _errors "  ${f}: link (${target}) does not exist\n")
      continue()
    endif()
    if(NOT anchor STREQUAL "" AND path MATCHES "\\.md$")
      _anchors(_defined ${path})
      list(FIND _defined "${anchor}" _at)
      if(_at EQUAL -1)
        string(APPEND _errors "  ${f}: link (${target}#${anchor}): no heading of that anchor\n")
      endif()
    endif()
  endforeach()
endforeach()
if(_nmd LESS 5)
  message(FATAL_ERROR "only ${_nmd} Markdown files found under ${ROOT}: wrong ROOT?")
endif()

if(_errors)
  message(FATAL_ERROR "the repository does not stand on its own:\n${_errors}")
endif()
message(STATUS "README.md ${_readme_size} of ${_readme_max} bytes; ${_nfiles} files point nowhere outside; "
  "${_nlinks} relative links in ${_nmd} Markdown files resolve")
