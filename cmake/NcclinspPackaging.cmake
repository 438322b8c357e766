# What `cmake --install` puts beside the library and the plugin, and the Debian package of it all
# (`cpack -G DEB` in the build tree; ctest package_deb builds it and runs lintian).
#
# share/ncclinsp/
#   prometheus/rules/*.yml          recording and alerting rules (prometheus/rules/)
#   prometheus/alertmanager.example.yml
#   grafana/*.json                  the dashboards (grafana/)
#   deploy/...                      deploy/ as in the source tree (Slurm, Kubernetes), without the
#                                   manifest validator's node project
#   deploy/kubernetes/generated/    the PrometheusRule and the dashboard ConfigMaps, generated from
#                                   the two folders above at build time (deploy/kubernetes/generate.py)
# Any other install() rule (the node cleaner's bin/ncclinsp-cleaner, ncclinsp-report) lands in the
# same package: it is one package of every component.
set(NCCLINSP_DATADIR ${CMAKE_INSTALL_DATADIR}/ncclinsp)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/prometheus/rules/ DESTINATION ${NCCLINSP_DATADIR}/prometheus/rules
        FILES_MATCHING PATTERN "*.yml")
install(FILES ${PROJECT_SOURCE_DIR}/prometheus/alertmanager.example.yml DESTINATION ${NCCLINSP_DATADIR}/prometheus)
file(GLOB _ncclinsp_dashboards ${PROJECT_SOURCE_DIR}/grafana/*.json)
install(FILES ${_ncclinsp_dashboards} DESTINATION ${NCCLINSP_DATADIR}/grafana)
if(EXISTS ${PROJECT_SOURCE_DIR}/deploy)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/ DESTINATION ${NCCLINSP_DATADIR}/deploy USE_SOURCE_PERMISSIONS
          PATTERN "validate" EXCLUDE PATTERN "node_modules" EXCLUDE PATTERN "__pycache__" EXCLUDE
          PATTERN "CMakeLists.txt" EXCLUDE PATTERN "*.py" EXCLUDE)
endif()

# The Debian package. dpkg-shlibdeps computes the library dependencies of what is installed from
# the binaries' own version needs (the plugin: libc6 only).
set(CPACK_PACKAGE_NAME ncclinsp)
set(CPACK_PACKAGE_VENDOR "ncclinsp")
set(CPACK_PACKAGE_CONTACT "ncclinsp maintainers <maintainers@users.noreply.a-seed-0ec04d18.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "NCCL profiler plugin and library for live communication metrics")
set(CPACK_PACKAGE_DESCRIPTION
    "ncclinsp instruments NCCL collectives and exports live communication metrics:\n a profiler plugin (NCCL_PROFILER_PLUGIN=ncclinsp) that writes Prometheus\n textfiles for node_exporter and JSON lines; a header-only C++20 library for\n frameworks that wrap NCCL themselves; Prometheus rules, Grafana dashboards,\n and Slurm and Kubernetes deployment files. The plugin needs glibc 2.28 or\n newer and no C++ runtime.")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://github.com/ncclinsp/ncclinsp")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The headers and the CMake package need {fmt} 9 (find_dependency(fmt 9)); the plugin does not.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libfmt-dev (>= 9)")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "prometheus-node-exporter, prometheus")
# The plugin is in a library directory (NCCL finds it by name): ldconfig runs through its trigger.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/cmake/debian/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Debian's policy files for the package: copyright and changelog under usr/share/doc/ncclinsp.
string(TIMESTAMP _ncclinsp_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/changelog.in ${CMAKE_BINARY_DIR}/debian/changelog @ONLY)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/debian/changelog.gz
  COMMAND gzip -n -9 -c ${CMAKE_BINARY_DIR}/debian/changelog > ${CMAKE_BINARY_DIR}/debian/changelog.gz
  DEPENDS ${CMAKE_BINARY_DIR}/debian/changelog VERBATIM)
add_custom_target(ncclinsp_debian_changelog ALL DEPENDS ${CMAKE_BINARY_DIR}/debian/changelog.gz)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/copyright ${CMAKE_BINARY_DIR}/debian/changelog.gz
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
include(CPack)
