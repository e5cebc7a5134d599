# inferlab_add_plugin(<name> [OUTPUT_DIR dir] [NO_INSTALL] SOURCES src...)
#
# Builds <name>.so as a MODULE library that exports only ilab_plugin_entry
# (linker version script) and links against nothing of the host. Used in the
# source tree and, installed, by third-party plugins via find_package(inferlab).
function(inferlab_add_plugin name)
  cmake_parse_arguments(P "NO_INSTALL" "OUTPUT_DIR" "SOURCES" ${ARGN})
  if(NOT P_OUTPUT_DIR)
    if(DEFINED ILAB_PLUGIN_OUTPUT_DIR)
      set(P_OUTPUT_DIR ${ILAB_PLUGIN_OUTPUT_DIR})
    else()
      set(P_OUTPUT_DIR ${CMAKE_CURRENT_BINARY_DIR})
    endif()
  endif()
  add_library(${name} MODULE ${P_SOURCES})
  if(TARGET inferlab::sdk)
    target_link_libraries(${name} PRIVATE inferlab::sdk)
  endif()
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    C_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR})
  target_link_options(${name} PRIVATE "-Wl,--version-script=${ILAB_PLUGIN_MAP}")
  if(NOT ILAB_SANITIZE)
    # Unresolved symbols fail the link, not a later dlopen.
    target_link_options(${name} PRIVATE "-Wl,-z,defs")
  endif()
  if(NOT P_NO_INSTALL AND DEFINED ILAB_INSTALL_PLUGIN_DIR)
    install(TARGETS ${name} LIBRARY DESTINATION ${ILAB_INSTALL_PLUGIN_DIR})
  endif()
endfunction()
