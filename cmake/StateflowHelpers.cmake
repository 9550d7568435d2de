# sf_add_test(<name> SOURCES <files...> LIBS <targets...> [SPEED fast|slow])
#
# GoogleTest executables per room (tests/<room>/), each TEST registered with
# CTest through gtest_discover_tests so that `ctest -R` can pick single cases.
# Every test carries two labels: its room (the folder's name: schedule,
# models, scenario, sim, backend, tools, plots), from the directory's LABELS,
# and its speed: `fast` (the default) or `slow` (left out of the sanitizer
# run). So `ctest -L sim`, `ctest -L fast`, `ctest -LE slow`.
function(sf_add_test name)
  cmake_parse_arguments(ARG "" "SPEED" "SOURCES;LIBS" ${ARGN})
  if(NOT ARG_SPEED)
    set(ARG_SPEED fast)
  endif()
  if(NOT ARG_SPEED MATCHES "^(fast|slow)$")
    message(FATAL_ERROR "sf_add_test(${name}): SPEED is fast or slow, not '${ARG_SPEED}'")
  endif()
  sf_label_room()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE
    SF_SOURCE_DIR="${CMAKE_SOURCE_DIR}" SF_BINARY_DIR="${CMAKE_BINARY_DIR}")
  sf_test_code(${name})
  # gtest_discover_tests passes its properties on as a flat list ("backend;
  # slow" became LABELS backend plus a property named slow), so the test
  # itself gets one label, its speed; the room comes from the directory.
  # One kernel thread unless a test sets another (backend/threading.h reads
  # OMP_NUM_THREADS as the default): the suite's results are those of T = 1,
  # and the T = 2 cases say so themselves.
  gtest_discover_tests(${name} PROPERTIES TIMEOUT 300 LABELS ${ARG_SPEED}
                       ENVIRONMENT OMP_NUM_THREADS=1 DISCOVERY_TIMEOUT 60)
endfunction()

# The room label of every test in the calling folder (tests/<room>/).
function(sf_label_room)
  get_filename_component(room ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  get_property(labels DIRECTORY PROPERTY LABELS)
  if(NOT room IN_LIST labels)
    set_property(DIRECTORY APPEND PROPERTY LABELS ${room})
  endif()
endfunction()

# A test program's own code (its test cases, helpers and the template
# instantiations they make) is compiled for compile time: -O1 in a Release
# build, -O0 in the sanitizer build (whose libraries are -O1). The code under
# test, in the libraries, keeps its build's level. Compiling GoogleTest's,
# Eigen's and the grid kernels' templates was most of the tests' build time
# (docs/performance.md, "Build and test time").
function(sf_test_code target)
  if(SF_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0>)
  else()
    target_compile_options(${target} PRIVATE
      $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
  endif()
endfunction()
