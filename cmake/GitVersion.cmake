# Writes the current git commit into a generated source on every build, so that the commit in
# each CSV row is the one the binary was built from, not the one CMake was configured at.
set(TB_GIT_SOURCE ${CMAKE_BINARY_DIR}/generated/git_commit.cpp)
add_custom_target(tb_git_commit
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUT=${TB_GIT_SOURCE}
          -P ${CMAKE_SOURCE_DIR}/cmake/WriteGitCommit.cmake
  BYPRODUCTS ${TB_GIT_SOURCE}
  COMMENT "Recording the git commit")
