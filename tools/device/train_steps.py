"""Per-step times and VMM calls of samples/pytorch_training/train.py runs:
    python3 tools/device/train_steps.py run1.json run2.json ...
(each file holds the JSON line one --allocator run prints, as its last line
that starts with "{"; a log with other lines around it will do)."""
import json, sys
for f in sys.argv[1:]:
    try:
        d = json.loads([l for l in open(f).read().splitlines() if l.startswith('{')][-1])
    except Exception as e:
        print(f, 'unreadable', e); continue
    st = d['step_seconds']
    print('%s: reserved %.2f GiB, total %.2f s, steps>=5 %.2f s' % (f.split('/')[-1], d['peak_reserved_bytes']/2**30, d['seconds'], sum(st[5:])))
    print('  ms/step', ' '.join('%d' % (x*1000) for x in st))
    if d.get('submit_seconds'):
        print('  submit ', ' '.join('%d' % (x*1000) for x in d['submit_seconds']))
    if 'critical_vmm_by_step' in d and d['allocator'].startswith('memlake'):
        print('  crit   ', ' '.join(str(x) for x in d['critical_vmm_by_step']))
        print('  worker ', ' '.join(str(x) for x in d['worker_vmm_by_step']))
        for key in sorted(k for k in d if k.endswith('_ms_by_step')):
            print('  %-22s' % key[:-len('_by_step')], ' '.join('%.1f' % x for x in d[key]),
                  '| steps>=5: %.0f' % sum(d[key][5:]))
