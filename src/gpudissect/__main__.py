from gpudissect.cli import main

main()
