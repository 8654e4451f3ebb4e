# The installed package: headers, libmemlake.so and libmemlake.a,
# memlake-replay and memlake-report, a CMake package (find_package(memlake CONFIG)) with the
# targets memlake::memlake (shared) and memlake::memlake_static, and
# pkg-config files (memlake.pc, memlake-static.pc). Included last by the root
# CMakeLists.txt, once every target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- usage requirements a consumer needs ------------------------------------
# The public headers are C++20 (memlake.h and the other .h files are C).
# The static library carries what its objects need at link time: threads,
# zlib and, where built with CUDA, the static CUDA runtime (with dl and rt);
# dl alone where only NVTX is built in.
# memlake_objects stays a build-tree detail: its include paths name the
# source tree.
foreach(target memlake memlake_shared)
  target_include_directories(${target} INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} INTERFACE cxx_std_20)
endforeach()
target_link_libraries(memlake INTERFACE Threads::Threads ZLIB::ZLIB)
if(MEMLAKE_HAVE_CUDA)
  target_link_libraries(memlake INTERFACE CUDA::cudart_static ${CMAKE_DL_LIBS})
elseif(MEMLAKE_HAVE_NVTX)
  target_link_libraries(memlake INTERFACE ${CMAKE_DL_LIBS})  # NVTX loads its tool with dlopen
endif()
set_target_properties(memlake PROPERTIES EXPORT_NAME memlake_static)
set_target_properties(memlake_shared PROPERTIES EXPORT_NAME memlake)
# The same names for a project that adds memlake with add_subdirectory().
add_library(memlake::memlake ALIAS memlake_shared)
add_library(memlake::memlake_static ALIAS memlake)

# ---- files ------------------------------------------------------------------
install(TARGETS memlake memlake_shared EXPORT memlakeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/memlake DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
if(TARGET memlake-replay)
  install(TARGETS memlake-replay memlake-report RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# ---- CMake package ----------------------------------------------------------
set(MEMLAKE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/memlake)
install(EXPORT memlakeTargets NAMESPACE memlake:: DESTINATION ${MEMLAKE_CMAKE_DIR})
configure_package_config_file(cmake/memlakeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/memlakeConfig.cmake INSTALL_DESTINATION ${MEMLAKE_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memlakeConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memlakeConfig.cmake
              ${PROJECT_BINARY_DIR}/memlakeConfigVersion.cmake
        DESTINATION ${MEMLAKE_CMAKE_DIR})

# ---- pkg-config -------------------------------------------------------------
# Libs.private (and memlake-static.pc) list what linking libmemlake.a needs:
# the C++ runtime for a C program, zlib, threads and, with CUDA, the static
# CUDA runtime.
set(MEMLAKE_PC_PRIVATE_LIBS "-lstdc++ -lm -lz -pthread")
if(MEMLAKE_HAVE_CUDA)
  get_filename_component(cudart_dir "${CUDA_cudart_static_LIBRARY}" DIRECTORY)
  string(APPEND MEMLAKE_PC_PRIVATE_LIBS " -L${cudart_dir} -lcudart_static -ldl -lrt")
elseif(MEMLAKE_HAVE_NVTX)
  string(APPEND MEMLAKE_PC_PRIVATE_LIBS " -ldl")
endif()
# The prefix is found from where the .pc file lies, so the files stay right
# after `cmake --install --prefix` elsewhere and when the tree is moved.
file(RELATIVE_PATH MEMLAKE_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" MEMLAKE_PC_TO_PREFIX "${MEMLAKE_PC_TO_PREFIX}")
foreach(pc memlake memlake-static)
  configure_file(cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
