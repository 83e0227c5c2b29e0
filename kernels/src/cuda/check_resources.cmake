# Build-time check of the kernels whose occupancy the planner assumes (pipeline/params.hpp:
# kResidentBlocksPerSm blocks of kThreads threads per SM, one wave of kResidentBlocks tiles):
# compiles resources_check.cu for sm_90 with ptxas -v and fails unless Pass1 and Pass2 have
# no spills, Pass2 uses at most 64 registers, and registers and shared memory both let
# kResidentBlocksPerSm blocks share an SM (H200: 64Ki registers, 228 KiB shared memory, 1 KiB
# reserved per block, registers allocated per warp in units of 256).
#   cmake -DNVCC=... -DSRC=<kernels/src> -DINCLUDE=<kernels/include> -DOUT=<file> -P this
execute_process(
  COMMAND ${NVCC} -cubin -arch=sm_90 -O3 -DNDEBUG -std=c++17 --expt-relaxed-constexpr
          -I${SRC} -I${INCLUDE} -Xptxas -v ${SRC}/cuda/resources_check.cu -o ${OUT}.cubin
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_resources: nvcc failed (${rc}):\n${err}")
endif()
set(log "${out}${err}")
file(WRITE ${OUT} "${log}")

file(READ ${SRC}/pipeline/params.hpp params)
string(REGEX MATCH "kResidentBlocksPerSm = ([0-9]+)" _ "${params}")
set(per_sm ${CMAKE_MATCH_1})
string(REGEX MATCH "kThreads = ([0-9]+)" _ "${params}")
set(threads ${CMAKE_MATCH_1})
if(NOT per_sm OR NOT threads)
  message(FATAL_ERROR "check_resources: kResidentBlocksPerSm / kThreads not found in params.hpp")
endif()

set(failures "")
foreach(body Pass1Body Pass2Body)
  string(LENGTH ${body} len)
  # ptxas prints, per entry: "Function properties for <mangled>", the spill line, "Used N
  # registers, ... M bytes smem".
  string(REGEX MATCH "Function properties for [^\n]*${len}${body}[^\n]*\n[^\n]*([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads\n[^\n]*Used ([0-9]+) registers[^\n]*" line "${log}")
  if(NOT line)
    list(APPEND failures "${body}: no ptxas -v report")
    continue()
  endif()
  string(REGEX MATCH "([0-9]+) bytes spill stores" _ "${line}")
  set(spills ${CMAKE_MATCH_1})
  string(REGEX MATCH "Used ([0-9]+) registers" _ "${line}")
  set(regs ${CMAKE_MATCH_1})
  set(smem 0)
  if(line MATCHES "([0-9]+) bytes smem")
    set(smem ${CMAKE_MATCH_1})
  endif()
  math(EXPR warp_regs "((${regs} * 32 + 255) / 256) * 256")
  math(EXPR by_regs "65536 / (${warp_regs} * (${threads} / 32))")
  math(EXPR by_smem "233472 / (${smem} + 1024)")
  message(STATUS "check_resources: ${body} sm_90: ${regs} registers, ${spills} bytes spilled, "
                 "${smem} bytes smem: ${by_regs} blocks/SM by registers, ${by_smem} by shared "
                 "memory (the planner assumes ${per_sm})")
  if(NOT spills EQUAL 0)
    list(APPEND failures "${body} spills ${spills} bytes")
  endif()
  if(by_regs LESS per_sm OR by_smem LESS per_sm)
    list(APPEND failures "${body} fits ${by_regs} (registers) / ${by_smem} (shared) blocks per SM, not ${per_sm}")
  endif()
  if(body STREQUAL "Pass2Body" AND regs GREATER 64)
    list(APPEND failures "Pass2Body uses ${regs} registers, more than 64")
  endif()
endforeach()
if(failures)
  string(REPLACE ";" "\n  " failures "${failures}")
  message(FATAL_ERROR "check_resources (ptxas -v in ${OUT}):\n  ${failures}")
endif()
