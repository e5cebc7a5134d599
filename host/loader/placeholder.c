void ilab_loader_placeholder_(void); void ilab_loader_placeholder_(void) {}
