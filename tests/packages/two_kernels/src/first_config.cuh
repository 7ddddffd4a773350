// Included by first.cu only: touching it must rebuild first.cu's fatbin alone.
#pragma once
#define FIRST_STATS_INCREMENT 1ull
