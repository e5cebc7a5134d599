# Every test registered anywhere in the build gets SKIP_RETURN_CODE 77
# (tests/support/ilab_skip.h), so a test program that skipped something shows
# as "Skipped" in ctest, never as "Passed", and scripts/check-skips.sh holds
# each skip against tests/skip-allowlist.txt.
#
# CMake 3.25 cannot set properties of tests in other directories, so this
# wraps add_test itself (included before any add_subdirectory). Arguments are
# forwarded one by one with their semicolons escaped, so an argument such as
# "-DCMD=prog;--flag" or a "sh -c" script reaches add_test unchanged.
set(ILAB_SKIP_RETURN_CODE 77)

function(add_test)
  set(args "")
  math(EXPR last "${ARGC} - 1")
  foreach(i RANGE ${last})
    string(REPLACE ";" "\\;" arg "${ARGV${i}}")
    list(APPEND args "${arg}")
  endforeach()
  _add_test(${args})
  if(ARGV0 STREQUAL "NAME")
    set_tests_properties(${ARGV1} PROPERTIES SKIP_RETURN_CODE ${ILAB_SKIP_RETURN_CODE})
  else()
    message(FATAL_ERROR "add_test(${ARGV0} ...): use the add_test(NAME <name> COMMAND ...) form")
  endif()
endfunction()
