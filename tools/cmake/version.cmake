# version.cmake: writes ${OUT} (version.h: G4_GIT_COMMIT) at every build, so `g4cu --version`
# names the commit the binary was built from ("-dirty" with uncommitted changes; "unknown"
# outside a git checkout). The file changes only when the commit does.
execute_process(COMMAND git -C ${SRC} describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
file(WRITE ${OUT}.tmp "#define G4_GIT_COMMIT \"${commit}\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
