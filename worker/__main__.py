from worker.cli import main

main()
