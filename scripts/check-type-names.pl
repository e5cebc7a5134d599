#!/usr/bin/perl
# Checks the type naming rule of docs/style.md over every .c and .h file of
# the source tree (the folders below); prints each violation as
# file:line: what is wrong, and exits 1 when there is one.
#
#   1. `_t` ends a type name only in sdk/include/inferlab/ (the plugin ABI,
#      and its released copies in tests/abi_compat/include-1.N/inferlab/):
#      there every struct typedef is `typedef struct ilab_x {...} ilab_x_t`
#      and every scalar or handle typedef ends in `_t`; SDK enums are
#      `typedef enum ilab_x {...} ilab_x` (no suffix, like the host's).
#   2. Everywhere else a typedef'd struct, enum or union has a tag of the
#      same name as the typedef (`typedef struct ilab_engine ilab_engine`).
#   3. A function-pointer type ends in `_fn`, everywhere.
#   4. A type declared in a header of host/ or common/ starts with `ilab_`.
#
# Usage: check-type-names.pl SOURCE_DIR
use strict;
use warnings;
use File::Find;

my $root = shift @ARGV or die "usage: $0 SOURCE_DIR\n";
$root =~ s{/+$}{};
my @folders = grep { -d "$root/$_" } qw(sdk host common plugins conformance tests bench fuzz tools);
die "$0: $root has none of sdk/ host/ plugins/: not the inferlab source tree\n" unless @folders;

my @files;
find(sub { push @files, $File::Find::name if /\.[ch]$/ && -f }, map { "$root/$_" } @folders);

my $violations = 0;
sub report {
    my ($file, $text, $pos, $msg) = @_;
    my $line = 1 + (substr($text, 0, $pos) =~ tr/\n//);
    print "$file:$line: $msg\n";
    $violations++;
}

# A balanced { ... } (three levels deep is enough for this tree's structs).
my $body = qr/\{(?:[^{}]|\{(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\})*\}/;

for my $path (sort @files) {
    (my $file = $path) =~ s{^\Q$root\E/}{};
    # Third-party code kept as its authors wrote it: the fresh sets of
    # independently written broken plugins (conformance/broken/fresh).
    next if $file =~ m{^conformance/broken/fresh/};
    open my $fh, '<', $path or die "$0: cannot read $path: $!\n";
    local $/;
    my $text = <$fh>;
    close $fh;
    # Comments and string literals out, lengths kept (line numbers stay right).
    $text =~ s{/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"}{ (my $s = $&) =~ s/[^\n]/ /g; $s }gse;
    my $sdk = $file =~ m{^(?:sdk/include|tests/abi_compat/include-1\.[0-9]+)/inferlab/};
    my $host_header = $file =~ m{^(host|common)/.*\.h$};

    while ($text =~ /\btypedef\s+(struct|enum|union)\b\s*(\w*)\s*($body)?\s*(\w+)\s*;/g) {
        my ($kind, $tag, $name, $pos) = ($1, $2, $4, $-[0]);
        if ($sdk) {
            my $want = $kind eq 'enum' ? $tag : "${tag}_t";
            report($file, $text, $pos, "SDK $kind $tag is named '$name'; the rule wants '$want'")
                if $tag eq '' || $name ne $want;
        } elsif ($tag eq '') {
            report($file, $text, $pos, "typedef $kind '$name' has no tag; name it $kind $name");
        } elsif ($name ne $tag) {
            report($file, $text, $pos, "typedef $kind $tag is named '$name'; tag and name differ");
        }
        report($file, $text, $pos, "type '$name' ends in _t outside sdk/include/inferlab")
            if !$sdk && $name =~ /_t$/;
        report($file, $text, $pos, "type '$name' in a host header lacks the ilab_ prefix")
            if $host_header && $name !~ /^ilab_/;
    }
    while ($text =~ /\btypedef\b[^;{}]*?\(\s*\*\s*(\w+)\s*\)\s*\(/g) {
        my ($name, $pos) = ($1, $-[0]);
        report($file, $text, $pos, "function-pointer type '$name' does not end in _fn")
            unless $name =~ /_fn$/;
        report($file, $text, $pos, "type '$name' in a host header lacks the ilab_ prefix")
            if $host_header && $name !~ /^ilab_/;
    }
    # Scalar typedefs: typedef <type> name; (and vector types with attributes).
    while ($text =~ /\btypedef\s+(?!struct\b|enum\b|union\b)[\w\s\*]+?\b(\w+)\s*(?:__attribute__\s*\(\(.*?\)\))?\s*;/g) {
        my ($name, $pos) = ($1, $-[0]);
        if ($sdk) {
            report($file, $text, $pos, "SDK scalar type '$name' does not end in _t")
                unless $name =~ /_t$/;
        } else {
            report($file, $text, $pos, "type '$name' ends in _t outside sdk/include/inferlab")
                if $name =~ /_t$/;
            report($file, $text, $pos, "type '$name' in a host header lacks the ilab_ prefix")
                if $host_header && $name !~ /^ilab_/;
        }
    }
}
printf "%d file(s) checked under %s; %d violation(s) of the type naming rule (docs/style.md)\n",
    scalar @files, join(' ', @folders), $violations;
exit($violations ? 1 : 0);
