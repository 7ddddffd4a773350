// Reached through an include directory with a space in its path.
#pragma once
#define SPACE_PATH_OK 1
