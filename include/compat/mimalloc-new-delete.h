/* mimalloc-new-delete.h on top of shardmalloc: include it in one C++ source file of the program
 * to route every global operator new/delete to shardmalloc (see docs/api/cxx.md). */
#ifndef SM_COMPAT_MIMALLOC_NEW_DELETE_H
#define SM_COMPAT_MIMALLOC_NEW_DELETE_H
#include <shardmalloc-new-delete.h>
#endif
