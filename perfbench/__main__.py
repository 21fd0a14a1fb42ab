from perfbench.cli import entry

entry()
