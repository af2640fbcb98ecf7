// Packed prefix-tree input: nodes are tokens, parents[i] is the parent node (-1 for a root).
// Parents must precede children (parents[i] < i), which also rules out cycles.
#pragma once

#include <cstdint>
#include <vector>

namespace anvil {

struct TreeInfo {
  int n = 0;                      // number of nodes
  std::vector<int32_t> parent;    // [N] parent index, -1 for roots
  std::vector<int32_t> depth;     // [N] depth = position id (roots have depth 0)
  std::vector<int32_t> pre;       // [N] DFS pre-order index of node i
  std::vector<int32_t> order;     // [N] node at pre-order index p (inverse of pre)
  std::vector<int32_t> end;       // [N] end of i's subtree in pre-order: j in subtree(i) iff pre[i] <= pre[j] < end[i]
  std::vector<int32_t> child_start;  // [N+1] CSR over children, children in index order
  std::vector<int32_t> children;     // [N - roots]
  std::vector<int32_t> internal;     // [M] nodes that have children (they alone need logits)
  std::vector<int32_t> internal_row; // [N] row of node i in `internal`, -1 for leaves
  int max_depth = 0;
  int64_t sum_len = 0;            // sum over nodes of (depth + 1): the attention work
};

// Validates the structure and derives pre-order, depths, subtree ends and children.
// Throws anvil::Error with a specific message on an empty pack or a bad parent index.
TreeInfo analyze_tree(const int32_t* parents, int n);

}  // namespace anvil
