# Note [Unity batches]: with RP_UNITY_BUILD each library's and test binary's C++ sources compile 4 at a time as one
# translation unit, so LibTorch's headers are paid for once per batch (~6.6 s a unit even precompiled on our
# 2-core machines, Note [LibTorch headers] in src/model/libtorch.h).
# CMake's own unity build writes `#include "<absolute path>"` into its batch files, so two clones in different
# places compile different files and ccache (CCACHE_BASEDIR, cmake/RpOptions.cmake) never hits across them: a
# fresh clone on a warm cache rebuilt every batch. rp_unity() writes the batches itself, each including its
# sources by a path relative to the batch file, which lies in the build tree at the same place in every clone.
# As CMake's does, it leaves alone the sources with compile options, definitions or flags of their own, and
# everything that is not C++ (.cu).

# rp_unity(<target>): the target's C++ sources replaced by batch files of 4 (a last batch of 1 stays as it is).
function(rp_unity target)
  get_target_property(sources ${target} SOURCES)
  get_target_property(srcdir ${target} SOURCE_DIR)
  get_target_property(bindir ${target} BINARY_DIR)
  set(dir "${bindir}/rp_unity")
  set(kept)
  set(batch)
  set(batches)
  set(index 0)
  foreach(src IN LISTS sources)
    cmake_path(ABSOLUTE_PATH src BASE_DIRECTORY "${srcdir}" OUTPUT_VARIABLE abs)
    set(own)
    foreach(prop COMPILE_OPTIONS COMPILE_DEFINITIONS COMPILE_FLAGS INCLUDE_DIRECTORIES)
      get_source_file_property(value "${abs}" DIRECTORY "${srcdir}" ${prop})
      if(value)
        set(own TRUE)
      endif()
    endforeach()
    if(NOT abs MATCHES "\\.cpp$" OR own)
      list(APPEND kept "${abs}")
      continue()
    endif()
    list(APPEND batch "${abs}")
    list(LENGTH batch size)
    if(size EQUAL 4)
      _rp_unity_write("${dir}" "${target}" ${index} batch batches)
      math(EXPR index "${index} + 1")
    endif()
  endforeach()
  list(LENGTH batch size)
  if(size EQUAL 1)
    list(APPEND kept ${batch})
  elseif(size GREATER 1)
    _rp_unity_write("${dir}" "${target}" ${index} batch batches)
  endif()
  set_property(TARGET ${target} PROPERTY SOURCES ${kept} ${batches})
endfunction()

# Writes <dir>/<target>_<index>.cxx including the files of the list named <_rp_list> (then emptied), and
# appends it to the list named <_rp_out>.
# file(CONFIGURE) rewrites it only when its text changes, so a reconfigure recompiles nothing.
function(_rp_unity_write dir target index _rp_list _rp_out)
  set(text "/* written by rp_unity (cmake/RpUnity.cmake) */\n")
  foreach(abs IN LISTS ${_rp_list})
    file(RELATIVE_PATH rel "${dir}" "${abs}")
    string(APPEND text "#include \"${rel}\"\n")
  endforeach()
  set(file "${dir}/${target}_${index}.cxx")
  file(CONFIGURE OUTPUT "${file}" CONTENT "${text}" @ONLY)
  set(${_rp_out} ${${_rp_out}} "${file}" PARENT_SCOPE)
  set(${_rp_list} "" PARENT_SCOPE)
endfunction()
