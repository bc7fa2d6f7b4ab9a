class Config:
    def __init__(self, _class, **kwargs):
        self._class = _class
        self._dict = dict(kwargs)

    def __getattr__(self, attr):
        return self._dict[attr]

    def __call__(self):
        return self._class(self)
