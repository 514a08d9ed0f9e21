// flashattn public API: tensor views, argument structs, the mask definition, validation, merge.
// Backends: flashattn/reference.hpp, flashattn/cpu.hpp, flashattn/gpu.hpp.
#pragma once

#include "flashattn/args.hpp"
#include "flashattn/block_mask.hpp"
#include "flashattn/block_mask_build.hpp"
#include "flashattn/convert.hpp"
#include "flashattn/error.hpp"
#include "flashattn/mask.hpp"
#include "flashattn/merge.hpp"
#include "flashattn/problem.hpp"
#include "flashattn/types.hpp"
#include "flashattn/validate.hpp"
