# inferlab_add_plugin(<name> [OUTPUT_DIR dir] [NO_INSTALL] SOURCES src...)
#
# Builds <name>.so as a MODULE library that exports only ilab_plugin_entry
# (linker version script) and links against nothing of the host. Used in the
# source tree and, installed, by third-party plugins via find_package(inferlab).

# Where this file lies: installed, plugin.map is beside it.
set_property(GLOBAL PROPERTY ILAB_ADD_PLUGIN_DIR "${CMAKE_CURRENT_LIST_DIR}")

function(inferlab_add_plugin name)
  cmake_parse_arguments(P "NO_INSTALL" "OUTPUT_DIR" "SOURCES" ${ARGN})
  if(NOT P_SOURCES)
    message(FATAL_ERROR "inferlab_add_plugin(${name}): no SOURCES given")
  endif()
  if(NOT P_OUTPUT_DIR)
    if(DEFINED ILAB_PLUGIN_OUTPUT_DIR)
      set(P_OUTPUT_DIR ${ILAB_PLUGIN_OUTPUT_DIR})
    else()
      set(P_OUTPUT_DIR ${CMAKE_CURRENT_BINARY_DIR})
    endif()
  endif()
  set(map "${ILAB_PLUGIN_MAP}")
  if(NOT map)
    get_property(dir GLOBAL PROPERTY ILAB_ADD_PLUGIN_DIR)
    set(map "${dir}/plugin.map")
  endif()
  if(NOT EXISTS "${map}")
    message(FATAL_ERROR "inferlab_add_plugin(${name}): linker version script ${map} not found")
  endif()
  add_library(${name} MODULE ${P_SOURCES})
  if(TARGET inferlab::sdk)
    target_link_libraries(${name} PRIVATE inferlab::sdk)
  endif()
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    C_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR}
    LINK_DEPENDS "${map}")
  target_link_options(${name} PRIVATE "-Wl,--version-script=${map}")
  if(NOT ILAB_SANITIZE AND NOT ILAB_FUZZ)
    # Unresolved symbols fail the link, not a later dlopen.
    target_link_options(${name} PRIVATE "-Wl,-z,defs")
  endif()
  if(NOT P_NO_INSTALL AND DEFINED ILAB_INSTALL_PLUGIN_DIR)
    # Relative to the install prefix, so `cmake --install --prefix` relocates it.
    include(GNUInstallDirs)
    install(TARGETS ${name} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/inferlab/plugins
            COMPONENT plugins)
  endif()
endfunction()
