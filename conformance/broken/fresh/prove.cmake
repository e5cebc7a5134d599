# cmake -DDRIVER=... -DDIR=... -DPLUGIN=... -DCASES=a;b;... -P prove.cmake
# For every case the driver must see no violation on the base (exit 1) and
# the violation on the variant (exit 0).
set(wrong 0)
foreach(c IN LISTS CASES)
  execute_process(COMMAND ${DRIVER} ${c} ${DIR}/${PLUGIN}_base.so RESULT_VARIABLE b
                  OUTPUT_VARIABLE bo ERROR_VARIABLE bo)
  execute_process(COMMAND ${DRIVER} ${c} ${DIR}/${PLUGIN}_${c}.so RESULT_VARIABLE v
                  OUTPUT_VARIABLE vo ERROR_VARIABLE vo)
  if(NOT b EQUAL 1 OR NOT v EQUAL 0)
    math(EXPR wrong "${wrong} + 1")
    message("${c}: base exit ${b} (${bo}), variant exit ${v} (${vo})")
  endif()
endforeach()
list(LENGTH CASES n)
if(wrong GREATER 0)
  message(FATAL_ERROR "${wrong} of ${n} cases not proven")
endif()
message("all ${n} cases proven: no violation on the base, the violation on each variant")
