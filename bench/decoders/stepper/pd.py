import sigrokdecode as srd


class Decoder(srd.Decoder):
    api_version = 3
    id = 'stepper'
    name = 'Stepper'
    longname = 'Stepper'
    desc = 'Waits for every sample or every edge.'
    license = 'gplv3+'
    inputs = ['logic']
    outputs = []
    tags = ['Debug/trace']
    channels = ({'id': 'c0', 'name': 'C0', 'desc': 'c0'},)
    options = ({'id': 'mode', 'desc': 'skip or edge', 'default': 'skip'},)
    annotations = (('x', 'X'),)

    def reset(self):
        pass

    def start(self):
        self.out_ann = self.register(srd.OUTPUT_ANN)

    def decode(self):
        cond = {'skip': 1} if self.options['mode'] == 'skip' else {0: 'e'}
        while True:
            self.wait(cond)
