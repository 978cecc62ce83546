/* Single-threaded tree building (in the spirit of the classic binary-trees GC benchmark): one
 * long-lived tree stays alive while many short-lived perfect binary trees of growing depth are
 * built, walked (node count and item checksum) and freed node by node.
 *
 *   trees MAXDEPTH [SEED]
 * Prints: RESULT secs=<s> nodes=<n>
 */
#include "common.h"

typedef struct tnode {
  struct tnode *l, *r;
  long item;
} tnode_t;

static long made;

static tnode_t *make(long item, int depth) {
  tnode_t *n = malloc(sizeof(tnode_t));
  if (!n) oom_fail(sizeof(tnode_t));
  made++;
  n->item = item;
  if (depth > 0) {
    n->l = make(2 * item - 1, depth - 1);
    n->r = make(2 * item, depth - 1);
  } else {
    n->l = n->r = NULL;
  }
  return n;
}
/* returns number of nodes; adds items (left minus right) to *sum */
static long walk(const tnode_t *n, long *sum) {
  if (!n->l) {
    *sum += n->item;
    return 1;
  }
  long s1 = 0, s2 = 0;
  long c = 1 + walk(n->l, &s1) + walk(n->r, &s2);
  *sum += n->item + s1 - s2;
  return c;
}
static void release(tnode_t *n) {
  if (n->l) {
    release(n->l);
    release(n->r);
  }
  free(n);
}
/* The item check of binary-trees: S(i, 0) = i and S(i, d) = i + S(2i-1, d-1) - S(2i, d-1),
 * so S(i, d) = i - 1 for every d >= 1, and the trees made from i and -i add up to -2. */

int main(int argc, char **argv) {
  int maxdepth = (int)arg_long(argc, argv, 1, 18);
  int mindepth = 4;
  if (maxdepth < mindepth + 2) maxdepth = mindepth + 2;
  double t0 = now_sec();
  tnode_t *longlived = make(0, maxdepth);
  long total = 0;
  for (int d = mindepth; d <= maxdepth; d += 2) {
    long iters = 1L << (maxdepth - d + mindepth);
    long want_nodes = (1L << (d + 1)) - 1;
    for (long i = 1; i <= iters; i++) {
      long s = 0, c;
      tnode_t *a = make(i, d);
      c = walk(a, &s);
      release(a);
      tnode_t *b = make(-i, d);
      c += walk(b, &s);
      release(b);
      if (c != 2 * want_nodes) verify_fail("trees: depth %d has %ld nodes, expected %ld", d, c, 2 * want_nodes);
      if (s != -2) verify_fail("trees: checksum %ld, expected -2", s);
      total += c;
    }
  }
  long s = 0;
  long c = walk(longlived, &s);
  if (c != (1L << (maxdepth + 1)) - 1 || s != -1) verify_fail("trees: long-lived tree lost nodes or items");
  release(longlived);
  double secs = now_sec() - t0;
  printf("RESULT secs=%.6f nodes=%ld\n", secs, made);
  (void)total;
  return 0;
}
