from lrcheck.cli import main

if __name__ == "__main__":  # not when a helper process (reports.render) imports it again
    main()
