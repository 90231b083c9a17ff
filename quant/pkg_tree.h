// pkg_tree.h: directory-tree helpers for writing a package beside another one: copy a tree
// (hard links where the file system allows, copies otherwise) and remove one.
#ifndef G4_PKG_TREE_H
#define G4_PKG_TREE_H

// Returns 1 for a file (path relative to the tree root, '/'-separated) to leave out.
typedef int (*g4_tree_skip_fn)(const char *rel, void *ctx);

// Recreates the tree under src inside dst (an existing directory). Regular files are hard-linked
// (the package files are never modified in place) or, across file systems or where linking is
// refused, copied; symbolic links are followed. skip may be NULL.
int g4_tree_link_copy(const char *src, const char *dst, g4_tree_skip_fn skip, void *ctx);

// Removes path and everything below it (symbolic links are removed, not followed).
int g4_tree_remove(const char *path);

#endif
