# tensor kernels: -O3 for auto-vectorised elementwise/data-movement loops.
$(BUILD)/obj/src/tensor/%.o: OPT := -O3
