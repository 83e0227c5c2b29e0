# The class path's timing table of classes-cpu.md: usage BENCH[,BENCH...] ROUNDS. Every
# (cell, mode, binary) runs once per round, interleaved, so a shared host's load falls on all of
# them alike; prints per binary the median over rounds of each run's median_ms, and the ratios.
import json, subprocess, sys, statistics, itertools
bins = sys.argv[1].split(',')
rounds = int(sys.argv[2])
cells = [(1, 10**4), (1, 10**5), (1, 10**6), (32, 10**4), (32, 10**5)]
modes = ['binary', 'binary-as-classes', '8', '64', 'weighted-neg']
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
for bi in bins:
    print('##', bi)
    print('| rows | n | k | ' + ' | '.join(modes) + ' | as-classes / binary | 8 / binary | 64 / binary | weighted-neg / as-classes |')
    for (b, n) in cells:
        med = {m: statistics.median(res[(bi, b, n, m)]) for m in modes}
        print(f'| {b} | {n} | {n//10} | ' + ' | '.join(f'{med[m]:.4g}' for m in modes) +
              f" | {med['binary-as-classes']/med['binary']:.2f}x | {med['8']/med['binary']:.2f}x | {med['64']/med['binary']:.2f}x | {med['weighted-neg']/med['binary-as-classes']:.2f}x |")
