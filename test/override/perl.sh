#!/bin/bash
# override-perl: Debian's perl (built with usemymalloc='n': every SV body and string comes from the
# C library's malloc) with LD_PRELOAD=libshardmalloc.so runs the benchmark's perl workload
# (bench/programs/plalloc.pl, small) and a one-liner; each must print what the glibc run prints.
. "$(dirname "$0")/common.sh"
need perl perl
script=$(cd "$(dirname "$0")/../.." && pwd)/bench/programs/plalloc.pl
export PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0
plain=$(perl "$script" 20000 2>&1)
check "plalloc.pl without preload prints its CHECK line" "CHECK" "$(echo "$plain" | cut -c1-5)"
check "plalloc.pl under shardmalloc: same CHECK digest as under glibc" "$plain" "$(preloaded perl "$script" 20000 2>&1)"
one='my %h; $h{$_} = [($_) x ($_ % 7)] for 1 .. 50000; delete $h{$_} for grep { $_ % 3 } 1 .. 50000; my $s = 0; $s += @$_ for values %h; print scalar(keys %h), " $s\n"'
check "a hash of arrays built and thinned" "$(perl -e "$one")" "$(preloaded perl -e "$one")"
check_true "perl's malloc and free bound to libshardmalloc (LD_DEBUG=bindings)" bound_to_shardmalloc 'perl' perl -e 'print "x" x 100'
finish
