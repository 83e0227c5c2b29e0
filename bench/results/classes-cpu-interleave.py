# The class path's timing table of classes-cpu.md: usage BENCH[,BENCH...] ROUNDS [CELLS]. Every
# (cell, mode, binary) runs once per round, interleaved, so a shared host's load falls on all of
# them alike; prints per binary the median over rounds of each run's median_ms, the ratios of
# the medians, and per ratio the median and range of the per-round ratios (each round's mode
# over the same round's base, same binary). CELLS: "B:N,B:N,..." (default: the six below).
import json, subprocess, sys, statistics
bins = sys.argv[1].split(',')
rounds = int(sys.argv[2])
cells = [(1, 10**4), (1, 10**5), (1, 10**6), (32, 10**4), (32, 10**5), (32, 10**6)]
if len(sys.argv) > 3:
    cells = [tuple(int(float(v)) for v in c.split(':')) for c in sys.argv[3].split(',')]
modes = ['binary', 'binary-as-classes', '8', '64', 'weighted-neg', 'hardest-neg']
# (mode, base): the ratios printed, each as the ratio of medians and per round.
ratios = [('binary-as-classes', 'binary'), ('8', 'binary'), ('64', 'binary'),
          ('weighted-neg', 'binary-as-classes'), ('hardest-neg', 'binary-as-classes')]
res = {}
for r in range(rounds):
    for (b, n) in cells:
        iters = max(3, min(200, int(3e7 / (b * n))))
        for m in modes:
            for bi in bins:
                cmd = [bi, '--backend', 'cpu', '--rows', str(b), '--n', str(n), '--k', str(n // 10),
                       '--dim', '16', '--label-dtype', 'int64', '--threads', '2', '--iters',
                       str(iters), '--json', '--classes', m]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                j = json.loads(out.strip().splitlines()[-1])
                res.setdefault((bi, b, n, m), []).append(j['median_ms'])
    print(f'# round {r + 1} of {rounds} done', file=sys.stderr, flush=True)
for bi in bins:
    print('##', bi)
    print('| rows | n | k | ' + ' | '.join(modes) + ' | ' +
          ' | '.join(f'{m} / {base}' for m, base in ratios) + ' |')
    print('|---:' * (3 + len(modes) + len(ratios)) + '|')
    for (b, n) in cells:
        med = {m: statistics.median(res[(bi, b, n, m)]) for m in modes}
        print(f'| {b} | {n} | {n//10} | ' + ' | '.join(f'{med[m]:.4g}' for m in modes) + ' | ' +
              ' | '.join(f'{med[m] / med[base]:.2f}x' for m, base in ratios) + ' |')
    print()
    print('Per-round ratios (same round, same binary): median [min-max]')
    print()
    print('| rows | n | ' + ' | '.join(f'{m} / {base}' for m, base in ratios) + ' |')
    print('|---:' * (2 + len(ratios)) + '|')
    for (b, n) in cells:
        cols = []
        for m, base in ratios:
            per = [x / y for x, y in zip(res[(bi, b, n, m)], res[(bi, b, n, base)])]
            cols.append(f'{statistics.median(per):.2f}x [{min(per):.2f}-{max(per):.2f}]')
        print(f'| {b} | {n} | ' + ' | '.join(cols) + ' |')
    print()
