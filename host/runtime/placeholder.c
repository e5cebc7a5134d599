void ilab_runtime_placeholder_(void); void ilab_runtime_placeholder_(void) {}
