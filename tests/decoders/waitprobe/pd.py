import sigrokdecode as srd


def parse_script(text):
    ''''/' separates waits, '|' conditions, '+' terms.

    A term is <channel><h|l|r|f|e|n> or s<count> (skip); 'N' is wait(),
    'E' wait({}), 'L' wait([]), 'Z' wait([{}]); '_' is an empty condition.
    '''
    waits = []
    for item in text.split('/'):
        if item in ('N', 'E', 'L', 'Z'):
            waits.append(item)
            continue
        conds = []
        for cond in item.split('|'):
            d = {}
            for term in cond.split('+'):
                if term in ('', '_'):
                    continue
                if term[0] == 's':
                    d['skip'] = int(term[1:])
                else:
                    d[int(term[:-1])] = term[-1]
            conds.append(d)
        waits.append(conds[0] if len(conds) == 1 else conds)
    return waits


class Decoder(srd.Decoder):
    api_version = 3
    id = 'waitprobe'
    name = 'Wait probe'
    longname = 'wait() semantics probe'
    desc = 'Annotates what each scripted wait() returned.'
    license = 'gplv3+'
    inputs = ['logic']
    outputs = []
    tags = ['Debug/trace']
    channels = (
        {'id': 'c0', 'name': 'C0', 'desc': 'channel 0'},
        {'id': 'c1', 'name': 'C1', 'desc': 'channel 1'},
        {'id': 'c2', 'name': 'C2', 'desc': 'channel 2'},
    )
    optional_channels = (
        {'id': 'o0', 'name': 'O0', 'desc': 'optional channel 3'},
        {'id': 'o1', 'name': 'O1', 'desc': 'optional channel 4'},
    )
    options = (
        {'id': 'script', 'desc': 'wait script', 'default': '0r'},
        {'id': 'limit', 'desc': 'waits before stopping (0: none)', 'default': 0},
        {'id': 'scale', 'desc': 'a float option', 'default': 1.5},
    )
    annotations = (
        ('result', 'Wait result'),
        ('calls', 'Call order'),
    )
    annotation_rows = (
        ('results', 'Results', (0,)),
        ('order', 'Order', (1,)),
    )

    def __init__(self):
        self.calls = ['init']

    def reset(self):
        self.calls.append('reset')

    def metadata(self, key, value):
        if key == srd.SRD_CONF_SAMPLERATE:
            self.calls.append('samplerate=%r' % (value,))

    def start(self):
        self.calls.append('start')
        self.out_ann = self.register(srd.OUTPUT_ANN)

    def wait_for(self, item):
        if item == 'N':
            return self.wait()
        if item == 'E':
            return self.wait({})
        if item == 'L':
            return self.wait([])
        if item == 'Z':
            return self.wait([{}])
        return self.wait(item)

    def decode(self):
        try:
            self.run()
        except Exception as exc:
            # libsigrokdecode 0.5.3 ends a decoder by making wait() fail:
            # show that outputs put then still arrive, and what was raised.
            self.put(self.samplenum, self.samplenum, self.out_ann,
                     [1, ['end %s' % type(exc).__name__]])

    def run(self):
        self.calls.append('decode')
        opts = '%s %r %r' % (self.options['script'], self.options['limit'], self.options['scale'])
        waits = parse_script(self.options['script'])
        done = 0
        first = True
        while True:
            for i, item in enumerate(waits):
                pins = self.wait_for(item)
                if first:
                    self.put(0, 0, self.out_ann, [1, [' '.join(self.calls) + ' | ' + opts]])
                    first = False
                matched = self.matched
                m = 'None' if matched is None else ''.join('T' if x else 'F' for x in matched)
                p = ','.join(str(v) for v in pins)
                self.put(self.samplenum, self.samplenum, self.out_ann,
                         [0, ['w%d n=%d pins=%s matched=%s' % (i, self.samplenum, p, m), 'w%d' % i]])
                done += 1
                if self.options['limit'] and done >= self.options['limit']:
                    return
