/* test-libc: memory that libc allocates internally is shardmalloc's and is freed by us without
 * complaint (DROPIN 16): strdup, getline, asprintf, open_memstream, realpath, regcomp, setenv,
 * scandir, glob, wordexp, locales (newlocale), iconv and NSS (getpwnam, getaddrinfo), whose modules
 * glibc loads with dlopen. */
#include "sm-test.h"

#include <dirent.h>
#include <glob.h>
#include <grp.h>
#include <iconv.h>
#include <locale.h>
#include <netdb.h>
#include <pwd.h>
#include <regex.h>
#include <sys/socket.h>
#include <wordexp.h>

#include "shardmalloc.h"

#define CHECK_OWNED(p) \
  CHECK(sm_check_owned(p), "%s: expected memory owned by shardmalloc, seen %p (not owned)", #p, (const void *)(p))

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int main(void) {
  sm_test_name = "test-libc";
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int round = 0; round < 3; round++) { /* repeated, so recycled memory is used as well */
    SECTION(round == 0 ? "strdup, strndup, asprintf" : round == 1 ? "strings (round 2)" : "strings (round 3)") {
      for (int i = 0; i < 2000; i++) {
        char *s = strdup("a string duplicated by libc");
        CHECK_OWNED(s);
        char *t = strndup(s, (size_t)(i % 20));
        CHECK(strlen(t) == (size_t)(i % 20), "strndup length: expected %d, seen %zu", i % 20, strlen(t));
        char *u = NULL;
        int n = asprintf(&u, "%s/%d/%0*d", s, i, i % 300, 7);
        CHECK(n > 0 && u && (size_t)n == strlen(u), "asprintf: expected %d chars, seen %zu", n, u ? strlen(u) : 0);
        if (i < 3) CHECK_OWNED(u);
        free(s);
        free(t);
        free(u);
      }
    }
    SECTION(round == 0 ? "getline, getdelim, open_memstream, fopen/fclose" : "stdio (again)") {
      char *buf = NULL;
      size_t size = 0;
      FILE *ms = open_memstream(&buf, &size);
      CHECK_NONNULL(ms);
      for (int i = 0; i < 5000; i++) fprintf(ms, "line %d %s\n", i, i % 100 == 0 ? "long long long long long long" : "");
      fclose(ms);
      CHECK_OWNED(buf);
      CHECK(size > 40000, "open_memstream size: expected > 40000, seen %zu", size);
      FILE *in = fmemopen(buf, size, "r");
      char *line = NULL;
      size_t cap = 0;
      int lines = 0;
      while (getline(&line, &cap, in) > 0) lines++;
      CHECK_EQ(lines, 5000);
      CHECK_OWNED(line);
      fclose(in);
      in = fmemopen(buf, size, "r");
      int fields = 0;
      while (getdelim(&line, &cap, ' ', in) > 0) fields++;
      CHECK(fields >= 10000, "getdelim: expected >= 10000 fields, seen %d", fields);
      fclose(in);
      free(line);
      free(buf);
      for (int i = 0; i < 200; i++) {
        FILE *f = fopen("/proc/self/status", "r");
        CHECK_NONNULL(f);
        char tmp[256];
        while (f && fgets(tmp, sizeof tmp, f)) {}
        if (f) fclose(f);
      }
    }
    SECTION(round == 0 ? "realpath(NULL), regcomp/regfree, scandir, glob, wordexp" : "more libc (again)") {
      char *rp = realpath("/proc/self/../self/.", NULL);
      CHECK(rp && !strncmp(rp, "/proc/", 6), "realpath: expected /proc/<pid>, seen %s", rp ? rp : "(null)");
      CHECK_OWNED(rp);
      free(rp);
      for (int i = 0; i < 300; i++) {
        regex_t re;
        int r = regcomp(&re, "^([a-z]+)-([0-9]{2,})(x|y)*$", REG_EXTENDED);
        CHECK(r == 0, "regcomp: expected 0, seen %d", r);
        regmatch_t m[4];
        CHECK(regexec(&re, "abc-1234xyx", 4, m, 0) == 0, "regexec: expected a match%s", "");
        CHECK(regexec(&re, "abc-1", 4, m, 0) == REG_NOMATCH, "regexec: expected no match%s", "");
        regfree(&re);
      }
      struct dirent **list = NULL;
      int n = scandir("/proc/self", &list, NULL, alphasort);
      CHECK(n > 5, "scandir(/proc/self): expected > 5 entries, seen %d", n);
      if (n > 0) CHECK_OWNED(list);
      for (int i = 0; i < n; i++) free(list[i]);
      free(list);
      glob_t g;
      CHECK(glob("/proc/self/*", 0, NULL, &g) == 0 && g.gl_pathc > 5, "glob(/proc/self/*): expected matches%s", "");
      globfree(&g);
      wordexp_t we;
      CHECK(wordexp("a b 'c d' e", &we, WRDE_NOCMD) == 0 && we.we_wordc == 4, "wordexp: expected 4 words, seen %zu",
            (size_t)we.we_wordc);
      wordfree(&we);
      int *big = malloc(200000 * sizeof(int)); /* glibc's qsort allocates a buffer for big arrays */
      for (int i = 0; i < 200000; i++) big[i] = (i * 7919) % 200003;
      qsort(big, 200000, sizeof(int), cmp_int);
      int sorted = 1;
      for (int i = 1; i < 200000; i++) sorted &= big[i - 1] <= big[i];
      CHECK(sorted, "qsort of 200000 ints: expected sorted%s", "");
      free(big);
    }
    SECTION(round == 0 ? "setenv/unsetenv churn" : "environment (again)") {
      char name[32], value[300];
      for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "SM_TEST_VAR_%d", i % 50);
        snprintf(value, sizeof value, "%0*d", i % 250 + 1, i);
        CHECK(setenv(name, value, 1) == 0, "setenv: expected 0%s", "");
        const char *got = getenv(name);
        CHECK(got && !strcmp(got, value), "getenv(%s): expected %s, seen %s", name, value, got ? got : "(null)");
        if (i % 3 == 0) unsetenv(name);
      }
      clearenv();
      setenv("PATH", "/usr/bin:/bin", 1);
    }
    SECTION(round == 0 ? "locales and iconv (dlopen'ed gconv modules)" : "locales and iconv (again)") {
      locale_t l = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
      CHECK(l != (locale_t)0, "newlocale(C.UTF-8): expected a locale, seen none (errno %d)", errno);
      if (l) freelocale(l);
      CHECK(setlocale(LC_ALL, "C.UTF-8") != NULL, "setlocale(C.UTF-8): expected success%s", "");
      setlocale(LC_ALL, "C");
      const char *targets[] = {"UTF-16LE", "ISO-8859-15", "UTF-32", "CP1252"};
      for (int i = 0; i < 4; i++) {
        iconv_t cd = iconv_open(targets[i], "UTF-8");
        CHECK(cd != (iconv_t)-1, "iconv_open(%s, UTF-8): expected success, seen errno %d", targets[i], errno);
        if (cd == (iconv_t)-1) continue;
        char in[] = "shardmalloc caf\xc3\xa9", out[128];
        char *ip = in, *op = out;
        size_t il = strlen(in), ol = sizeof out;
        CHECK(iconv(cd, &ip, &il, &op, &ol) != (size_t)-1 && il == 0, "iconv to %s: expected all converted, left %zu",
              targets[i], il);
        iconv_close(cd);
      }
    }
    SECTION(round == 0 ? "NSS: getpwnam, getgrgid, getaddrinfo" : "NSS (again)") {
      struct passwd *pw = getpwnam("root");
      CHECK(pw && pw->pw_uid == 0, "getpwnam(root): expected uid 0, seen %s", pw ? "other" : "none");
      struct group *gr = getgrgid(0);
      CHECK(gr != NULL, "getgrgid(0): expected a group, seen none%s", "");
      char buf[4096];
      struct passwd pwd, *res = NULL;
      CHECK(getpwuid_r(0, &pwd, buf, sizeof buf, &res) == 0 && res, "getpwuid_r(0): expected an entry%s", "");
      struct addrinfo hints = {0}, *ai = NULL;
      hints.ai_socktype = SOCK_STREAM;
      int r = getaddrinfo("localhost", "80", &hints, &ai);
      CHECK(r == 0 && ai, "getaddrinfo(localhost): expected success, seen %d (%s)", r, r ? gai_strerror(r) : "");
      if (ai) {
        CHECK_OWNED(ai);
        freeaddrinfo(ai);
      }
      endpwent();
    }
  }
  return sm_test_summary();
}
