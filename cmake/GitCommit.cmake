# Writes OUT: `#define SF_GIT_COMMIT "<short hash>[-dirty]"`, the commit of
# the source tree SRC at build time ("" outside a checkout), rewriting OUT
# only when it changes so that an unchanged commit rebuilds nothing. Run by
# the sf_git_commit target on every build (tools/CMakeLists.txt), so a
# report's provenance names the tree the binary was built from, not the one
# CMake last configured.
#   cmake -DSRC=<source dir> -DOUT=<header> -P GitCommit.cmake
execute_process(COMMAND git rev-parse --short HEAD
                WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE failed ERROR_QUIET)
if(failed)
  set(commit "")
else()
  # Tracked files that differ from the commit.
  execute_process(COMMAND git diff --quiet HEAD --
                  WORKING_DIRECTORY ${SRC}
                  RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty)
    set(commit "${commit}-dirty")
  endif()
endif()
file(WRITE ${OUT}.tmp "#define SF_GIT_COMMIT \"${commit}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.tmp)
