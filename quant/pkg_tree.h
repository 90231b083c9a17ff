// pkg_tree.h: directory-tree helpers for writing a package beside another one: copy a tree
// and remove one.
#ifndef G4_PKG_TREE_H
#define G4_PKG_TREE_H

// Returns 1 for a file (path relative to the tree root, '/'-separated) to leave out.
typedef int (*g4_tree_skip_fn)(const char *rel, void *ctx);

// Recreates the tree under src inside dst (an existing directory). Regular files are copied,
// never hard-linked (an in-place edit of one package must not change the other): reflinked
// where the file system can (FICLONE), else byte by byte; symbolic links are followed. skip may
// be NULL.
int g4_tree_copy(const char *src, const char *dst, g4_tree_skip_fn skip, void *ctx);

// Removes path and everything below it (symbolic links are removed, not followed).
int g4_tree_remove(const char *path);

#endif
