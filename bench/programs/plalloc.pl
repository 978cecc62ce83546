# Allocation-heavy Perl workload for the allocator benchmark.
#
# Run as `perl plalloc.pl SCALE` (Debian's perl uses the C library's malloc: usemymalloc='n'). It
# holds and churns what Perl programs hold: a hash of records (arrays of strings and small hashes),
# rounds that delete a third of it and add new entries, a sorted index, strings joined and split, a
# word count, and a queue of short-lived arrays. Every step checks itself, and the script prints
# one line `CHECK <digest>` that must be the same under every allocator (nothing depends on hash
# order).
use strict;
use warnings;

my $n = @ARGV ? int($ARGV[0]) : 100000;
my $digest = 0;
sub mix { $digest = ($digest * 31 + $_[0]) % 4294967291; }
sub fail { print STDERR "plalloc: $_[0]\n"; exit 1; }

# 1. records: a key of 4-20 characters, an array of strings, a small hash
my %rec;
for my $i (1 .. $n) {
  my $key = "k$i" . ("x" x ($i % 17));
  $rec{$key} = [$i, "v" x ($i % 60), {id => $i, tag => "t" . ($i % 97)}];
}
fail("records: expected $n, saw " . scalar(keys %rec)) unless keys %rec == $n;

# 2. rounds: delete a third in sorted order, add new entries of other sizes
for my $round (1 .. 3) {
  my @keys = sort keys %rec;
  my $gone = 0;
  for my $j (0 .. $#keys) {
    next unless $j % 3 == $round % 3;
    delete $rec{$keys[$j]};
    $gone++;
  }
  for my $i (1 .. int($n / 3)) {
    $rec{"r$round-$i"} = join(",", map { $_ * $round } 1 .. ($i % 25));
  }
  mix($gone);
  mix(scalar keys %rec);
}

# 3. a sum over every value, whatever the hash order
my $sum = 0;
for my $v (values %rec) {
  $sum += ref $v ? $v->[0] + length($v->[1]) + $v->[2]{id} : length $v;
}
mix($sum % 1000003);

# 4. strings joined, split and counted
my @words = map {
  my $w = $_ % 5003; # a vocabulary of 5,003 words, each used about n / 5,003 times
  join "", map { chr(97 + ($w * 7 + $_ * 13) % 26) } 1 .. (3 + $w % 9)
} 1 .. $n;
my $text = join " ", @words;
my @back = split / /, $text;
fail("split: expected " . scalar(@words) . " words, saw " . scalar(@back)) unless @back == @words;
my %count;
$count{$_}++ for @back;
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 4];
mix($count{$_}) for @top;
mix(length $_) for @top;

# 5. a queue of short-lived arrays: push one, shift one once it holds 500
my @queue;
my $kept = 0;
for my $i (1 .. 2 * $n) {
  push @queue, [($i) x (1 + $i % 12)];
  if (@queue > 500) {
    my $old = shift @queue;
    fail("queue: damaged entry") unless @$old == 1 + $old->[0] % 12;
    $kept += @$old;
  }
}
mix($kept % 1000003);

printf "CHECK %08x%08x\n", $digest, ($digest ^ 0x5bd1e995) & 0xffffffff;
