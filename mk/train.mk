# Training engine: stamp the code version into meta.json.
$(BUILD)/obj/src/train/train.o: CFLAGS += $(BUILD_INFO)
# Training kernels: -O3 vectorises the elementwise loops (no fast-math, so
# results are unchanged and still deterministic).
$(BUILD)/obj/src/train/ops.o $(BUILD)/obj/src/train/model.o $(BUILD)/obj/src/train/optim.o: CFLAGS += -O3
$(BUILD)/obj/src/train/runlog.o: CFLAGS += $(BUILD_INFO)
