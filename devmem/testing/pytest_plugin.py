"""pytest plugin (entry point ``pytest11``): ``--devmem-platform NAME`` certifies an installed platform."""


def pytest_addoption(parser):
    group = parser.getgroup("devmem")
    group.addoption("--devmem-platform", default=None, metavar="NAME",
                    help="run devmem's conformance kit against the installed platform NAME")
