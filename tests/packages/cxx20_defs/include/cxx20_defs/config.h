// Reached only through the target's include directories.
#pragma once
#define CXX20_DEFS_HEADER_SEEN 1
