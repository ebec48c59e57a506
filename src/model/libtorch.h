// The parts of LibTorch the project uses: tensors and their operators, autograd, and the nn modules the models are
// built of. Include this, not <torch/torch.h> (Note [LibTorch headers]).
#pragma once

#include <torch/autograd.h>
#include <torch/nn/functional.h>
#include <torch/nn/init.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>
#include <torch/utils.h>

// Note [LibTorch headers]
// <torch/torch.h> also brings LibTorch's data loaders, optimizers, serialization and JIT, which the project does not
// use, and GCC instantiates the templates their inline functions use at the end of every translation unit that
// includes them, precompiled or not: an empty file compiled with <torch/torch.h> as its precompiled header took
// 17.6 s on our 2-core machines, with this header 6.6 s (-O2 -g1, 2026-11-27). This header is the precompiled
// header of every target that uses LibTorch (RP_USE_PCH, src/model/CMakeLists.txt), named by its include path so
// that the generated file that includes it is the same in every clone (ccache, Note [Unity batches]).
