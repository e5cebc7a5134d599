# cmake -DCMD=<program;args> -DEXPECT=<exit code> -P check_exit.cmake
# Runs CMD and fails unless it exits with EXPECT.
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL EXPECT)
  message(FATAL_ERROR "${CMD} exited ${rc}, expected ${EXPECT}\n${out}${err}")
endif()
message(STATUS "${CMD} exited ${rc} as expected")
