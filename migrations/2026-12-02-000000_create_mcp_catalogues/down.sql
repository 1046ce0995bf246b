DROP TABLE mcp_catalogues;
