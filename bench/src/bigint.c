/* Single-threaded compute kernel with many small, short-lived allocations (in the spirit of cfrac):
 * build random expression trees over big integers and evaluate them. Every tree node and every
 * intermediate big integer is a separate heap block that dies soon after it is made; the numbers
 * range from one limb to a few hundred. Each result is checked against the same expression
 * evaluated modulo two primes with plain 64-bit arithmetic.
 *
 *   bigint TASKS [DEPTH=7] [SEED]
 * Prints: RESULT secs=<s> tasks=<n> allocs=<n> checksum=<x>
 */
#include "common.h"

typedef struct {
  uint32_t n;      /* limbs in use */
  uint32_t d[];    /* little endian base 2^32 */
} big_t;

static long nallocs;

static big_t *big_new(uint32_t n) {
  big_t *b = malloc(sizeof(big_t) + (size_t)(n ? n : 1) * sizeof(uint32_t));
  if (!b) oom_fail(n * 4);
  b->n = n;
  nallocs++;
  return b;
}
static void big_trim(big_t *b) {
  while (b->n > 1 && b->d[b->n - 1] == 0) b->n--;
}
static big_t *big_add(const big_t *a, const big_t *b) {
  if (a->n < b->n) { const big_t *t = a; a = b; b = t; }
  big_t *r = big_new(a->n + 1);
  uint64_t c = 0;
  for (uint32_t i = 0; i < a->n; i++) {
    c += (uint64_t)a->d[i] + (i < b->n ? b->d[i] : 0);
    r->d[i] = (uint32_t)c;
    c >>= 32;
  }
  r->d[a->n] = (uint32_t)c;
  big_trim(r);
  return r;
}
static big_t *big_mul(const big_t *a, const big_t *b) {
  big_t *r = big_new(a->n + b->n);
  memset(r->d, 0, (size_t)r->n * 4);
  for (uint32_t i = 0; i < a->n; i++) {
    uint64_t c = 0, ai = a->d[i];
    for (uint32_t j = 0; j < b->n; j++) {
      c += ai * b->d[j] + r->d[i + j];
      r->d[i + j] = (uint32_t)c;
      c >>= 32;
    }
    r->d[i + b->n] = (uint32_t)c;
  }
  big_trim(r);
  return r;
}
static uint64_t big_mod(const big_t *a, uint64_t p) {
  unsigned __int128 x = 0;
  for (uint32_t i = a->n; i-- > 0;) x = ((x << 32) | a->d[i]) % p;
  return (uint64_t)x;
}

/* expression tree */
typedef struct node {
  int op; /* 0 leaf, 1 add, 2 mul */
  struct node *l, *r;
  big_t *leaf;
  uint64_t m1, m2; /* value mod P1, P2 */
} node_t;

#define P1 1000000007ull
#define P2 2305843009213693951ull /* 2^61 - 1 */

static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t p) { return (uint64_t)((unsigned __int128)a * b % p); }

static node_t *build(rng_t *r, int depth) {
  node_t *n = malloc(sizeof(node_t));
  if (!n) oom_fail(sizeof(node_t));
  nallocs++;
  if (depth == 0 || rng_below(r, 8) == 0) {
    uint32_t limbs = 1 + rng_below(r, 4);
    n->op = 0;
    n->l = n->r = NULL;
    n->leaf = big_new(limbs);
    for (uint32_t i = 0; i < limbs; i++) n->leaf->d[i] = (uint32_t)rng_next(r) | 1u;
    big_trim(n->leaf);
    n->m1 = big_mod(n->leaf, P1);
    n->m2 = big_mod(n->leaf, P2);
    return n;
  }
  n->op = 1 + (int)rng_below(r, 2);
  n->leaf = NULL;
  n->l = build(r, depth - 1);
  n->r = build(r, depth - 1);
  if (n->op == 1) {
    n->m1 = (n->l->m1 + n->r->m1) % P1;
    n->m2 = (n->l->m2 + n->r->m2) % P2;
  } else {
    n->m1 = mulmod(n->l->m1, n->r->m1, P1);
    n->m2 = mulmod(n->l->m2, n->r->m2, P2);
  }
  return n;
}

/* evaluates and frees the tree bottom-up; intermediate numbers die as soon as they are used */
static big_t *eval(node_t *n) {
  big_t *v;
  if (n->op == 0) v = n->leaf;
  else {
    big_t *a = eval(n->l), *b = eval(n->r);
    v = n->op == 1 ? big_add(a, b) : big_mul(a, b);
    free(a);
    free(b);
  }
  if (big_mod(v, P1) != n->m1 || big_mod(v, P2) != n->m2) verify_fail("bigint: wrong value in an expression node");
  free(n);
  return v;
}

int main(int argc, char **argv) {
  long tasks = arg_long(argc, argv, 1, 20000);
  int depth = (int)arg_long(argc, argv, 2, 7);
  uint64_t seed = (uint64_t)arg_long(argc, argv, 3, 9);
  rng_t r;
  rng_seed(&r, seed);
  uint64_t checksum = 0;
  double t0 = now_sec();
  for (long t = 0; t < tasks; t++) {
    node_t *root = build(&r, depth);
    uint64_t m1 = root->m1;
    big_t *v = eval(root);
    if (big_mod(v, P1) != m1) verify_fail("bigint: wrong result");
    checksum = checksum * 31 + m1 + v->n;
    free(v);
  }
  double secs = now_sec() - t0;
  printf("RESULT secs=%.6f tasks=%ld allocs=%ld checksum=%llx\n", secs, tasks, nallocs, (unsigned long long)checksum);
  return 0;
}
