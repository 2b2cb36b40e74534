int dynamiccl_placeholder;
