class BaseDataLoader:
    def initialize(self, opt):
        self.opt = opt

    def load_data(self):
        return None
