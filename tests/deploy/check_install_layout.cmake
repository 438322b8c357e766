# cmake -DBUILD=<build dir> -DSRC=<source dir> -DPREFIX=<scratch prefix> -DLIBDIR=lib -DINCLUDEDIR=include
#       -DBINDIR=bin -P check_install_layout.cmake
# `cmake --install` into a scratch prefix lays out the plugin, the headers, the CMake package, and
# under share/ncclinsp every rule file, every dashboard, the deploy files and the generated
# Kubernetes manifests, without the validator's node project; bin/ncclinsp-cleaner when the
# source tree has the cleaner.
get_filename_component(SRC ${SRC} ABSOLUTE)
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${PREFIX} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${err}")
endif()
set(_want
  ${LIBDIR}/libnccl-profiler-ncclinsp.so
  ${INCLUDEDIR}/ncclinsp/ncclinsp.hpp
  ${LIBDIR}/cmake/ncclinsp/ncclinspConfig.cmake
  ${LIBDIR}/cmake/ncclinsp/ncclinspTargets.cmake
  share/ncclinsp/prometheus/alertmanager.example.yml
  share/ncclinsp/deploy/kubernetes/README.md
  share/ncclinsp/deploy/kubernetes/job.yaml
  share/ncclinsp/deploy/kubernetes/cleaner-daemonset.yaml
  share/ncclinsp/deploy/kubernetes/node-exporter-values.yaml
  share/ncclinsp/deploy/kubernetes/generated/ncclinsp-prometheusrule.yaml
  share/ncclinsp/deploy/kubernetes/generated/ncclinsp-dashboards.yaml
  share/doc/ncclinsp/copyright)
file(GLOB _rules RELATIVE ${SRC}/prometheus/rules ${SRC}/prometheus/rules/*.yml)
foreach(f IN LISTS _rules)
  list(APPEND _want share/ncclinsp/prometheus/rules/${f})
endforeach()
file(GLOB _dash RELATIVE ${SRC}/grafana ${SRC}/grafana/*.json)
foreach(f IN LISTS _dash)
  list(APPEND _want share/ncclinsp/grafana/${f})
endforeach()
file(GLOB_RECURSE _deploy RELATIVE ${SRC}/deploy ${SRC}/deploy/*.yaml ${SRC}/deploy/*.yml ${SRC}/deploy/*.md ${SRC}/deploy/*.sh)
foreach(f IN LISTS _deploy)
  if(NOT f MATCHES "(^|/)(validate|node_modules)/")
    list(APPEND _want share/ncclinsp/deploy/${f})
  endif()
endforeach()
if(EXISTS ${SRC}/tools/cleaner)
  list(APPEND _want ${BINDIR}/ncclinsp-cleaner)
endif()
set(_missing)
foreach(f IN LISTS _want)
  if(NOT EXISTS ${PREFIX}/${f})
    list(APPEND _missing ${f})
  endif()
endforeach()
if(EXISTS ${PREFIX}/share/ncclinsp/deploy/kubernetes/validate)
  list(APPEND _missing "(present but must not be: share/ncclinsp/deploy/kubernetes/validate)")
endif()
if(_missing)
  list(JOIN _missing "\n  " _m)
  message(FATAL_ERROR "the install tree under ${PREFIX} lacks:\n  ${_m}")
endif()
list(LENGTH _want _n)
message(STATUS "install tree: all ${_n} expected files present")
file(REMOVE_RECURSE ${PREFIX})
