# sf_add_test(<name> SOURCES <files...> LIBS <targets...> [LABELS <label>])
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
  # gtest_discover_tests passes its properties on as a flat list: "backend;
  # slow" became LABELS backend plus a property named slow, and no label at
  # all made TIMEOUT the label and dropped the timeout. So: at most one
  # label, and LABELS only when there is one.
  list(LENGTH ARG_LABELS label_count)
  if(label_count GREATER 1)
    message(FATAL_ERROR "sf_add_test(${name}): give one label, not '${ARG_LABELS}'")
  endif()
  # One kernel thread unless a test sets another (backend/threading.h reads
  # OMP_NUM_THREADS as the default): the suite's results are those of T = 1,
  # and the T = 2 cases say so themselves.
  set(properties TIMEOUT 300 ENVIRONMENT OMP_NUM_THREADS=1)
  if(label_count EQUAL 1)
    list(APPEND properties LABELS ${ARG_LABELS})
  endif()
  gtest_discover_tests(${name} PROPERTIES ${properties} DISCOVERY_TIMEOUT 60)
endfunction()
