from lrcheck.cli import main

main()
