from flowcore_cli.main import main

main()
