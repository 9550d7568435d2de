# sf_add_test(<name> SOURCES <files...> LIBS <targets...> [LABELS <labels...>])
#
# One GoogleTest executable per room (tests/<room>/), each TEST registered with
# CTest through gtest_discover_tests so that `ctest -R` can pick single cases.
function(sf_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE
    SF_SOURCE_DIR="${CMAKE_SOURCE_DIR}" SF_BINARY_DIR="${CMAKE_BINARY_DIR}")
  gtest_discover_tests(${name}
    PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 300
    DISCOVERY_TIMEOUT 60)
endfunction()
