#include "tree.h"

#include <string>

#include "common.h"

namespace anvil {

TreeInfo analyze_tree(const int32_t* parents, int n) {
  if (n <= 0) throw Error("empty pack: a pack needs at least one node");
  TreeInfo t;
  t.n = n;
  t.parent.assign(parents, parents + n);
  t.depth.assign(n, 0);
  std::vector<int32_t> nchild(n, 0);
  for (int i = 0; i < n; i++) {
    int p = parents[i];
    if (p == i) throw Error("cycle: node " + std::to_string(i) + " is its own parent");
    if (p < -1) throw Error("parent index out of range: parents[" + std::to_string(i) + "] = " + std::to_string(p) + " (use -1 for a root)");
    if (p >= n) throw Error("parent index out of range: parents[" + std::to_string(i) + "] = " + std::to_string(p) + " but the pack has " + std::to_string(n) + " nodes");
    if (p > i)
      throw Error("parent index >= child index: parents[" + std::to_string(i) + "] = " + std::to_string(p) +
                  "; parents must precede their children (this also rules out cycles)");
    if (p >= 0) {
      t.depth[i] = t.depth[p] + 1;
      nchild[p]++;
    }
  }
  // children in CSR, in index order
  t.child_start.assign(n + 1, 0);
  for (int i = 0; i < n; i++) t.child_start[i + 1] = t.child_start[i] + nchild[i];
  t.children.assign(t.child_start[n], 0);
  std::vector<int32_t> fill(t.child_start.begin(), t.child_start.end() - 1);
  for (int i = 0; i < n; i++)
    if (parents[i] >= 0) t.children[fill[parents[i]]++] = i;
  // subtree sizes bottom-up (children have larger indices than parents)
  std::vector<int32_t> size(n, 1);
  for (int i = n - 1; i >= 0; i--)
    if (parents[i] >= 0) size[parents[i]] += size[i];
  // pre-order top-down: roots in index order, then each node places its children right after it
  t.pre.assign(n, 0);
  int next_root = 0;
  for (int i = 0; i < n; i++) {
    if (parents[i] < 0) {
      t.pre[i] = next_root;
      next_root += size[i];
    }
    int pos = t.pre[i] + 1;
    for (int c = t.child_start[i]; c < t.child_start[i + 1]; c++) {
      int ch = t.children[c];
      t.pre[ch] = pos;
      pos += size[ch];
    }
  }
  t.order.assign(n, 0);
  t.end.assign(n, 0);
  t.internal_row.assign(n, -1);
  for (int i = 0; i < n; i++) {
    t.order[t.pre[i]] = i;
    t.end[i] = t.pre[i] + size[i];
    if (nchild[i] > 0) {
      t.internal_row[i] = static_cast<int32_t>(t.internal.size());
      t.internal.push_back(i);
    }
    if (t.depth[i] > t.max_depth) t.max_depth = t.depth[i];
    t.sum_len += t.depth[i] + 1;
  }
  return t;
}

}  // namespace anvil
